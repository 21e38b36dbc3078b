3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"¸
GraphModuleu
input_0j`®,>Ö‹T¿ıã¾ÀîÖ¾uÆ	>ò5ø>HJ?˜„ı?„[¶?”rÛ>Ş(Ú¿Zû ?.òb¿hcğ¼nÜ¿öª–¾ì²²¿®Ò|¿iù]>BæC?%j¾ş?šê¿³Æa?v

expected_0h`®,>Ö‹T¿ıã¾ÀîÖ¾uÆ	>ò5ø>HJ?˜„ı?„[¶?”rÛ>Ş(Ú¿Zû ?.òb¿hcğ¼nÜ¿öª–¾ì²²¿®Ò|¿iù]>BæC?%j¾ş?šê¿³Æa?":
m5

nn.Flatten
	start_dim
end_dimÿÿÿÿÿÿÿÿÿ