"""The ``tiledsl`` command line: one module per command (cli dispatches; explain, graph,
plot, bench, tune; jobs launches MPI jobs). Commands use the compiler and the runtime;
neither uses them."""
