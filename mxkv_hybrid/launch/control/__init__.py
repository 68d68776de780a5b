"""The launcher's control plane: how long it waits for what (`timing`) and when a lost
member is started again (`restarts`). Every launch path reads these; none keeps a bound
of its own."""
