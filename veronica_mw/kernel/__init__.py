"""The kernel: ExecutionContext, limits, ledger, call graph, pricing, policies and primitives.

Imports no other layer of the package and no framework."""
