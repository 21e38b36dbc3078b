3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)f


x0x0
>
optorch.nn.functional.avg_pool1d":x0"*
stride

outputoutput":op"’
GraphModuleS
input_0H@V=½gïÍ?ó?Œ³È>bó¿2Vö><8-?ª¤³>>Ø=?Á¿ËM‚¿¾®Á¾dŸ:>‘É¿ø³Y¾.

expected_0 ÝH”?ÓÇ>5<Ý•¿£§¿&¿