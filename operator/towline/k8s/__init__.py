"""The only code that talks to the API server: clients, builders, observation, actions."""
