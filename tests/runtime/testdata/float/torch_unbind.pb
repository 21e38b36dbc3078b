3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)F


x0x0

optorch.unbind":x0"

outputoutput":op"¾
GraphModule¾
input_0²¨pRu¿à§”¿gÔ¾‰'K?’Bt?jÌ¿ÌÈº½=@èÃ¿NVà¼Í¡¿“É¿„\¿Ê?âj>ìm¿øZÂ¿­–!?æ}ß¾õ‹Ñ¾YT¨¿P·?… ">ûl`½çÄu?7V„>w¬•?	°€>/w’¿šw¿GŽÀ¹¿'g¿Å~°¾øP?›¾š¿_è¥<Ú±=¸’>.>d¿sBî>ð>N

expected_0@8pRu¿‰'K?ÌÈº½NVà¼„\¿ìm¿æ}ß¾P·?çÄu?	°€>GŽÀÅ~°¾_è¥<.>d¿N

expected_1@8à§”¿’Bt?=@Í¡¿Ê?øZÂ¿õ‹Ñ¾… ">7V„>/w’¿¹¿øP?Ú±=sBî>N

expected_2@8gÔ¾jÌ¿èÃ¿“É¿âj>­–!?YT¨¿ûl`½w¬•?šw¿'g¿›¾š¿¸’>ð>