"""Files, below everything that reads or writes them: positioned reads into numpy buffers
(`pread`), many files listed or named to native code at once (`files`), and outputs
written atomically and checked before any work (`output`). It imports only
`gpu_profiler.errors`, `gpu_profiler.native` and the kernels' constants, so the readers,
the histogram, the analyses and the renderers can all build on it."""
