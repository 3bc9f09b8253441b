"""Backends: one subpackage per target kind (its Target class, lowering hooks, compiling and
measuring), each a plug-in that registers itself when `akg.target.load_plugins` imports it.
Nothing outside a kind's own subpackage imports it."""
