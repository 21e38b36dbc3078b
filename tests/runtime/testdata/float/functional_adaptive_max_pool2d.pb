3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)a


x0x0
9
op'torch.nn.functional.adaptive_max_pool2d":x0"

outputoutput":op"│
GraphModule╥
input_0╚═яU▐©√hw>я~>#п7?о\$?÷iN?∙Б?}s7╬Ц?с╝╬╦з©й╟9>╗Ш5=╚Lю©┌°?Г`"?Л─©ы"]>┐b©6╥╬^ЯP©▀^?IY8©┌w%><Ш╬╫ре @7ВU>У9╕©Q⌠╖=Р|j?еH╬bп ?ejp>╗:R?	ь╬K╨┼©┤ю▀©{s≈?k┼┘?.┌╬8

expected_0* ÷iN?#п7?Г`"?┌°?ре @Р|j?bп ?{s≈?