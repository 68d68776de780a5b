"""The launcher's control plane: the one framing every control connection speaks
(`channel`), how long it waits for what (`timing`), when a lost member is started again
(`restarts`), the launcher's link with every rank (`link`, and the rank's side: `keeper`,
`keeper_process`) and what ends the launcher's processes if it dies (`reaper`). Every
launch path reads these; none keeps a bound or a framing of its own."""
