"""Experiments: the task models and training loops the chapters run.

The mechanism packages (``general_model``, ``feature_related``,
``general_mechanisms``, ``query_related``, ``transformer``, ``evaluation``)
implement the survey; :mod:`attnsurvey.data` only generates data. The models
that a chapter trains around a mechanism to show it working (a classifier
whose only varying part is the alignment, a VQA model around co-attention,
...) live here, one module per chapter family:

* :mod:`.seq2seq` - §1 (introduction): the encoder-decoder training loop;
* :mod:`.general_model` - §2: the match-the-query task;
* :mod:`.feature_related` - §3.1: aspect sentiment, VQA, documents, meta-embeddings;
* :mod:`.general_mechanisms` - §3.2: score, alignment and dimensionality comparisons;
* :mod:`.query_related` - §3.3.1-3.3.2: pooling baselines, learned query, capsules;
* :mod:`.evaluation` - §4: the probe model whose weights the evaluation methods replace;
* :mod:`.chapter_c` - §3.3.2 variants and §4.2: analytic attention costs, the calibrated
  Linformer inputs and projections, the traced adversarial search;
* :mod:`.kv_sharing`, :mod:`.long_positions`, :mod:`.trained_transformer` - beyond the
  survey (chapters 6.1, 6.2, 6.4): MHA/GQA/MQA, position encodings past the training length,
  the encoder-decoder trained end to end.

Dependencies point one way: experiments import mechanisms, data and
:mod:`attnsurvey.training`; only the chapter-support layer (this package and
:mod:`attnsurvey.exercises`) imports it (``tests/test_architecture.py`` checks this).
"""
