

@pytest.mark.skipif("fbgemm" not in torch.backends.quantized.supported_engines,
                    reason="PyTorch's float16 dynamic Linear needs FBGEMM (1.13's Debian "
                           "build has none)")
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_float16_dynamic_linear_converts_and_runs_like_pytorch(model_name):
    """float16_dynamic_qconfig: nnqd.Linear(dtype=torch.float16), the weight cast to
    float16, as PyTorch's convert_fx makes it; fuselage's runtime multiplies in float32."""
    torch.manual_seed(0)
    cls, shape = MODELS[model_name]
    model = cls().eval()
    example = torch.randn(*shape)
    mapping = QConfigMapping().set_object_type(nn.Linear, float16_dynamic_qconfig)
    with engine(x86_engine()):
        ours, theirs = quantize_both(model, mapping, example, get_native_backend_config())
        assert leaf_types(ours) == leaf_types(theirs)
        for name, t in leaf_types(theirs).items():
            if t is torch.ao.nn.quantized.dynamic.Linear:
                a, b = ours.get_submodule(name), theirs.get_submodule(name)
                assert a._packed_params.dtype == b._packed_params.dtype == torch.float16
                assert torch.equal(a.weight(), b.weight()), name
        for seed in range(3):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * (seed + 1)
            want = theirs(x)
            assert torch.equal(ours(x), want)
            got = torch.from_numpy(_core.run(_core.from_torch(ours), [x.numpy()])[0])
            assert relative_error(got, want) <= RTOL
