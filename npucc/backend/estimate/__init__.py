"""Plan estimators that price what the lowering will execute (they import the lowering)."""
