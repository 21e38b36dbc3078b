3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)x


x0x0
(
optorch.chunk":x0"*	
dim
$
itemoperator.getitem":op"

outputoutput":item"ÿ
GraphModule¾
input_0²¨pRu¿à§”¿gÔ¾‰'K?’Bt?jÌ¿ÌÈº½=@èÃ¿NVà¼Í¡¿“É¿„\¿Ê?âj>ìm¿øZÂ¿­–!?æ}ß¾õ‹Ñ¾YT¨¿P·?… ">ûl`½çÄu?7V„>w¬•?	°€>/w’¿šw¿GŽÀ¹¿'g¿Å~°¾øP?›¾š¿_è¥<Ú±=¸’>.>d¿sBî>ð>/

expected_0!æ}ß¾õ‹Ñ¾YT¨¿.>d¿sBî>ð>