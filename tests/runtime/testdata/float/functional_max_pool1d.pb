3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)X


x0x0
0
optorch.nn.functional.max_pool1d":x0"

outputoutput":op"œ
GraphModuleT
input_0I@V=½gïÍ?ó?Œ³È>bó¿2Vö><8-?ª¤³>>Ø=?Á¿ËM‚¿¾®Á¾dŸ:>‘É¿ø³Y¾7

expected_0) gïÍ?ó?2Vö><8-?>Ø=?¾dŸ:>ø³Y¾