"""Unity ML-Agents builds: ML-Agents' communication protocol (API 1.5.0), spoken by evtrain."""
