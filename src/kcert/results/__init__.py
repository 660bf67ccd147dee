"""Result types, frozen and torch-free: one module per gate (``algebra``, ``bias``, ``variance``, L0's
``bitwise``), the checks' (``checks``), the certificate that carries them (``certificate``) and
``kcert train-compare``'s (``training``). Gates build them, renderers read them; derived numbers are
their methods. ``kcert.certificate`` re-exports the certification's under the public path."""
