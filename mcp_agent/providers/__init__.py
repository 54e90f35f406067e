"""Model providers: one module per API. Importing this package loads no HTTP client."""
