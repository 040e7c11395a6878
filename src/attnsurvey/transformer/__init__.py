"""§3.3.2 The Transformer and its variants.

* ``model``        encoder and decoder layers: multi-head attention, feed-forward,
                   residual + normalisation (post-norm and pre-norm), masks
* ``positional``   absolute position encodings: sinusoidal and learned (review eq. 13)
* ``relative``     relative positions with clipping (review eq. 14-15) and the
                   learnable Gaussian local bias (review eq. 16)
* ``directional``  DiSAN's forward and backward directional masks
* ``tasks``        the synthetic sequence tasks the chapters train on
* variants: ``transformer_xl``, ``reformer``, ``linformer``, ``lite``,
  ``synthesizer``, ``local``
"""
