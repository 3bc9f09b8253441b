"""The NPU model: a DaVinci-style NPU (public Ascend AI Core architecture) that akg generates
programs for and simulates, since no real one is reachable. Every number of the machine is
one `spec.NpuSpec`; `isa` is the instruction set a backend emits (typed values with a
printable listing); `layout` converts matrices to and from the cube's fractal layouts;
`check.check_program` rejects a program that breaks a static rule (capacity, alignment,
paths, bounds) before it runs; `sim.simulate` executes it in NumPy and counts its cycles with
a pipe model, detecting races. Reports say "npu-sim": nothing here is real hardware.

This package registers no target yet and imports nothing on its own, so that
`akg.target.load_plugins` importing it costs nothing; import its modules by name. See
docs/npu.md."""
