3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)F


x0x0

opoperator.sub"":x0

outputoutput":op"ь
GraphModulet
input_0i`шV§?h{.?и2°јXш≥>Кz@÷°>њ[oгј≈®®њКAэ>Ь…mњhНЖ@Ўра?у ?ЇъO@џ§ј•знЊ0ј¬њzЄ©Њт≈Йјjм{@YцљД%ќ?аѓњҐ™Вјw

expected_0i`а[СЊ0	£>и2Ѕ@‘&?хґњлPя?ЃЈAbT@;_?ќдц?–Mј∞бAњЊЋ>Їъјџƒ@йyї?`!@n™?т≈©@jм;јСeП?Kњр@Ґ™Ґ@