"""Per-core scheduling: the `schedule` pass, the scheduler registry and the baseline scheduler.

The schedule data (`npucc.ir.schedule`) and the replay rules that give it a meaning
(`npucc.ir.replay`) are part of the IR.
"""
