// placeholder: filled in by the issue 18 work
