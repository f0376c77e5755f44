"""Training of the demo target/draft pair (pure PyTorch, no Django)."""
