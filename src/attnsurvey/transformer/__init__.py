"""§3.3.2 The Transformer and its variants.

* ``model``           encoder and decoder layers: multi-head attention, feed-forward,
                      residual + normalisation (post-norm and pre-norm), masks
* ``positional``      absolute position encodings: sinusoidal and learned (review eq. 13)
* ``relative``        relative positions with clipping (review eq. 14-15) and the
                      learnable Gaussian local bias (review eq. 16)
* ``directional``     DiSAN's forward and backward directional masks
* ``transformer_xl``  segment recurrence with a memory of cached states
* ``reformer``        LSH buckets and reversible layers
* ``linformer``       keys and values projected to a fixed length k
* ``lite``            Lite Transformer's long-short range attention
* ``synthesizer``     synthesised (dense and random) attention weights
* ``local``           attention within a window around each position

The multi-head attention these layers use is
:mod:`attnsurvey.query_related.multihead`; the synthetic sequence tasks the
chapters train on are in :mod:`attnsurvey.data.sequences`.
"""
