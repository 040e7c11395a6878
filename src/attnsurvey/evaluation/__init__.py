"""§4 Evaluation of attention: extrinsic (task performance, ablations) and intrinsic (alignment, explanation) measures."""
