"""Checks around the three gates (docs/kernelbench.md):

- :mod:`.adequacy` and :mod:`.fakes`: can this certification tell a fake? Fixed fake kernels run
  through the same probes and gates; a fake that is not FAILed keeps the certificate from a PASS.
- :mod:`.peers`: what the common rules (``torch.testing.assert_close``, KernelBench's allclose,
  FlashAttention's 2x rule, ``torch._dynamo.utils.same``) say on the same samples.
- :mod:`.shapes` and :mod:`.sweep`: the algebra gate and a short bias/variance run at shapes derived
  from the given one; a FAIL there FAILs the certificate.
- :mod:`.short`: the short run they make of a derived case, through the certification core.
- :mod:`.run`: attaches them to a certificate. Their result types are :mod:`kcert.results.checks`.
"""
