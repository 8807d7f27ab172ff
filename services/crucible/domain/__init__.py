"""Pure domain types: phases, kinds, reasons, errors and the run specs. No I/O here."""
