"""attnsurvey: the code behind *Attention in Deep Learning — a runnable survey*.

The mechanism packages follow the survey's table of contents (Brauwers &
Frasincar, "A General Survey on Attention Mechanisms in Deep Learning"):

* ``attention``           §2   the one core: ``attend`` with hooks (score, alignment, mask, bias), SDPA dispatch
* ``general_model``       §2   the general attention model, Eq. (1)-(5)
* ``feature_related``     §3.1 co-attention, rotatory, levels, representations
* ``general_mechanisms``  §3.2 scoring, alignment (sparse maps, pointer, structured), dimensionality
* ``query_related``       §3.3 types and multiplicity of queries (multi-head, multi-hop, capsules)
* ``transformer``         §3.3.2 the Transformer and its variants
* ``seq2seq``             §1   the RNN encoder-decoder with attention
* ``taxonomy``/``builder``/``attention_step``/``describe``  §3 Fig. 3, Table III: a model from a point
* ``beyond``              after the survey: tiled and ring attention, KV-cache decoding with MQA/GQA,
                                RoPE and ALiBi, greedy and beam search
* ``evaluation``          §4   extrinsic and intrinsic evaluation

Below them: ``_checks``, ``registry``, ``masking``, ``catalog``, ``training``, ``stats``,
``plotting``, ``widgets``, ``numeric_env`` (foundations) and ``data``
(synthetic tasks only). Above them: ``experiments`` (the task models and
training loops chapters run), ``exercises`` and ``figures``. Imports point
down only; ``tools/architecture.py`` in the repository reads the import
graph and ``tests/test_architecture.py`` enforces it.
"""

__version__ = "0.2.0"
