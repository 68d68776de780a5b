"""The jobs tier: real MPI jobs, ps-lite servers and relays on 127.0.0.1."""
