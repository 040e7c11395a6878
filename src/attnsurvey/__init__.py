"""attnsurvey: the code behind *Attention in Deep Learning — a runnable survey*.

The package tree follows the survey's table of contents (Brauwers & Frasincar,
"A General Survey on Attention Mechanisms in Deep Learning"):

* ``general_model``       §2   the general attention model, Eq. (1)-(5)
* ``feature_related``     §3.1 multiplicity, levels, representations of features
* ``general_mechanisms``  §3.2 scoring, alignment, dimensionality
* ``query_related``       §3.3 types and multiplicity of queries
* ``transformer``         §3.3 the Transformer and its variants
* ``taxonomy``/``evaluation``  §4 Table III and evaluation

Shared helpers: ``masking``, ``plotting``, ``training``, ``data``, ``catalog``.
"""

__version__ = "0.1.0"
