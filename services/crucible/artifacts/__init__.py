"""Where checkpoint and dataset bytes live and how their content is digested: plain files and
fsspec, no torch, so the control plane's workers and the SDK share one definition."""
