3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)_


x0x0

ww
-
optorch.nn.functional.linear":x0":w

outputoutput":op"Å
GraphModuleI
wD<×Ù%¾WbŸ>ò•á½V(ë¾ ‡8>²^¿?½a¿?Bæ?¿ro‚¾#œ·¾þÄ)?¥œ$?3,?ã=©1B?;
input_00(7@>2V¿M‰U¿:N~>=^¿g-–:^ÝÀ°bã¿<Ù©¾iaƒ¿.

expected_0 òÜë¾
>¾„ Ó¿Hùù¾!³«¿söUÀ