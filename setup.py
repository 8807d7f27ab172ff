"""Package discovery only; all metadata is in pyproject.toml.

Three source roots feed one distribution: services/ (the `crucible` package), operators/
(`crucible_operator`) and migrations/ (installed as `crucible_migrations`, so that
`crucible db upgrade` finds its Alembic scripts from any install, not just a checkout).
"""

from setuptools import find_packages, setup

setup(
    package_dir={
        "": "services",
        "crucible_operator": "operators/crucible_operator",
        "crucible_migrations": "migrations",
    },
    packages=[
        *find_packages("services", include=["crucible", "crucible.*"]),
        *find_packages("operators", include=["crucible_operator", "crucible_operator.*"]),
        "crucible_migrations",
        "crucible_migrations.versions",
    ],
)
