3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op" 
GraphModuleŽ
input_0‚x0”¿NÜ
¾9š!¿&Ï1ÀµKÉ=’u±?³N¿«Í‹¿\Ú¿ý£œ¾¤¥	@ÅU+Àßr?j`/¿O¢ó¾^`¿Îlƒ>ûÛ?‡i`¿ß$Ê¾Æ>mv¿Îp@¿ÇWl=Vo¿ãÞn¿´—“¿¨*¿”¿à†?H

expected_0:0ý˜ê¾G¿­//¾q„¿Ï	>Ü“½ØNº>U->Ð£È¾8è
¿sçj¿•?m½"6
m1
nn.AdaptiveAvgPool2d
output_size
B

