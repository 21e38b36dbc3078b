3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)ƒ


x0x0
*
opsplit":x0"
B

*	
dim
-
itemoperator.getitem":op"ÿÿÿÿÿÿÿÿÿ

outputoutput":item"Ø
GraphModule¾
input_0²¨pRu¿à§”¿gÔ¾‰'K?’Bt?jÌ¿ÌÈº½=@èÃ¿NVà¼Í¡¿“É¿„\¿Ê?âj>ìm¿øZÂ¿­–!?æ}ß¾õ‹Ñ¾YT¨¿P·?… ">ûl`½çÄu?7V„>w¬•?	°€>/w’¿šw¿GŽÀ¹¿'g¿Å~°¾øP?›¾š¿_è¥<Ú±=¸’>.>d¿sBî>ð>‡

expected_0ypà§”¿gÔ¾’Bt?jÌ¿=@èÃ¿Í¡¿“É¿Ê?âj>øZÂ¿­–!?õ‹Ñ¾YT¨¿… ">ûl`½7V„>w¬•?/w’¿šw¿¹¿'g¿øP?›¾š¿Ú±=¸’>sBî>ð>