"""Sweeps (issue 27): a base run spec, a search space over its `config`, trials that are
ordinary runs, and early stopping by ASHA. docs/sweeps.md says what is built."""
