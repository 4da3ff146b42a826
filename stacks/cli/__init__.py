"""trainctl, one module per command (group): docs/design.md places it among the other packages."""
