"""The control plane: the web admin's pages and API (configuration, status, users, tokens, audit).
Imports components' entry points, governance, the platform and the contract.
"""
