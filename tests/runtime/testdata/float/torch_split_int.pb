3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)[


x0x0
3
optorch.functional.split":x0"*	
dim

outputoutput":op"Á
GraphModule¾
input_0²¨pRu¿à§”¿gÔ¾‰'K?’Bt?jÌ¿ÌÈº½=@èÃ¿NVà¼Í¡¿“É¿„\¿Ê?âj>ìm¿øZÂ¿­–!?æ}ß¾õ‹Ñ¾YT¨¿P·?… ">ûl`½çÄu?7V„>w¬•?	°€>/w’¿šw¿GŽÀ¹¿'g¿Å~°¾øP?›¾š¿_è¥<Ú±=¸’>.>d¿sBî>ð>_

expected_0QHpRu¿à§”¿gÔ¾‰'K?’Bt?jÌ¿ÌÈº½=@èÃ¿P·?… ">ûl`½çÄu?7V„>w¬•?	°€>/w’¿šw¿_

expected_1QHNVà¼Í¡¿“É¿„\¿Ê?âj>ìm¿øZÂ¿­–!?GŽÀ¹¿'g¿Å~°¾øP?›¾š¿_è¥<Ú±=¸’>/

expected_2!æ}ß¾õ‹Ñ¾YT¨¿.>d¿sBî>ð>