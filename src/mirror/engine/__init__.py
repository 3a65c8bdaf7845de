"""The native data path: `worker` (one flow's consume -> produce -> commit loop), `targets`
(target topics made to match), `runner` (flows in threads)."""
