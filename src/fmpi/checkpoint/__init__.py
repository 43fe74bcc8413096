"""Checkpoint/restart: jobs longer than one launch (Lambda's 900 s) run as several, each continuing the last.

    from fmpi import checkpoint

    state, step = checkpoint.restore(initial_state, 0)
    while step < steps:
        state = iterate(state)
        step += 1
        checkpoint.save(state, step)

Under ``fmpirun --max-runtime`` (which sets FMPI_CHECKPOINT_URL) a save()
keeps the state every FMPI_CHECKPOINT_EVERY seconds and, when the launch is
about to hit its time limit, stops the world; fmpirun launches it again and
restore() picks up the newest complete checkpoint. Outside fmpirun both are
no-ops, so the program still runs under mpiexec.
"""

from .api import RESUME_EXIT, CheckpointError, restore, save

__all__ = ["RESUME_EXIT", "CheckpointError", "restore", "save"]
