"""Files, below everything that reads or writes them: outputs written atomically and checked
before any work (`output`). It imports nothing of the package but `gpu_profiler.errors`,
so the histogram, the analyses and the renderers can all write through it."""
