"""evalbeam pipelines: transforms composed into runnable jobs, and the `evalbeam` command."""
