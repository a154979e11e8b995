"""GPU tests (`@pytest.mark.gpu`): a package, so their file names may repeat the cpu tests' names."""
