"""`python -m crucible.workloads.eval`: the eval job's entry point (`jobs/eval.py`); the
library is `evaluate.py`. Kept free of imports so that a bad config fails at once."""

if __name__ == "__main__":
    from crucible.workloads.jobs.eval import main

    main()
