"""The runtime, by concern: actors/, events/, output/, transport/, bootstrap/, onnode/, worker/, commands/;
at the top only what the user holds (pool, blocking, compute, settings, serialize). See docs/design.md."""
