"""What every app needs and no app owns: formatting, publish-after-commit, the cluster backend
factory, text checks, the API's shared plumbing. Imports no Slipway app (only ``cluster``)."""
