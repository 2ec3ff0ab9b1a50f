"""Tools on top of the compiler: the `npucc` command line, its subcommands and benchmarks."""
