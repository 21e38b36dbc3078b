3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"³
GraphModuleE
input_0:0Ð­¢¿Àiâ¼È/=@ï?²¨¿¨CO¿Z.¿Qmì¾:?9G£?`¹1¼úâÊ¿H

expected_0:0Ð­¢¿Àiâ¼È/=@ï?²¨¿¨CO¿Z.¿Qmì¾:?9G£?`¹1¼úâÊ¿"
m
nn.Dropout2d