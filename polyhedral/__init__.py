"""akg.polyhedral: the only code that imports islpy (model, dependences, scheduling, AST -> TIR)."""
