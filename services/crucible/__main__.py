from crucible.cli.main import app

app()
