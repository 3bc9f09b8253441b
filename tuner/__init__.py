"""akg.tuner: tuning tasks and their scheduler, features, cost models (`cost_model/`), search
strategies (`search/`), builders (`builder/`) and runners (`runner/`), and the tuning loop
(`tune`)."""
