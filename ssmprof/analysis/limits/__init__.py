"""What limits each kernel: roofline, limiters, instruction bounds, caches, tensor vs vector, analytic work."""
