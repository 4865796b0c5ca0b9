"""``graph-opt``: the default graph-stage pipeline (what ``compile`` and ``explore`` run).

The order, and why:

1. ``fold-constants``     weights computed by ConstantOfShape and shape chains become constants,
                          so everything after sees plain constant weights and static attributes
2. ``eliminate-noops``    Identity, inference Dropout, reshapes/transposes/casts that change nothing
3. ``cancel-transposes``  transposes and reshapes that compose or cancel
4. ``recognize-patterns`` decomposed GELU, LayerNorm, softmax and HardSwish become single ops, so
                          the fusions below see them as what they are
5. ``fold-batchnorm``     BN (and per-channel Mul/Add by constants) into conv/gemm/matmul weights:
                          must come before epilogue fusion, which would otherwise stop at the BN
6. ``fuse-epilogues``     conv/gemm/matmul + bias + activation + residual add: CBR
6b. ``fold-qdq``         DQ -> conv/gemm/matmul (with its fused epilogue) -> Q becomes one int8
                          layer (explicitly quantized models); after epilogue fusion so the
                          activation is folded in too, before merging siblings
7. ``merge-siblings``     sibling layers reading one input (Inception's 1x1s, Q/K/V) become one
                          wider layer; after epilogue fusion so that siblings carrying the same
                          activation still merge
8. ``fuse-elementwise``   what elementwise chains remain become one op with a scalar body
9. ``eliminate-concat``   last: producers are final, so each can be told to write its slice
10. ``cse``, ``dce``      merge duplicates and drop what became dead
"""

GRAPH_OPT = ("fold-constants,eliminate-noops,cancel-transposes,recognize-patterns,"
             "fold-batchnorm,fuse-epilogues,fold-qdq,merge-siblings,fuse-elementwise,"
             "eliminate-concat,cse,dce")
