"""A run's environments: Gymnasium vector environments from ``env_settings``, PettingZoo's
(and the co-players acting in their copies), and ``vectorization: ray``'s actors."""
