"""Result types, frozen and torch-free: one module per gate (``algebra``, ``bias``, ``variance``, L0's
``bitwise``), the checks' (``checks``) and the certificate that carries them (``certificate``). Gates
build them, renderers read them; derived numbers are their methods. ``kcert.certificate`` re-exports
them under the public path."""
