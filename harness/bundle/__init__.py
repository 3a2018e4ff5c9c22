"""Evidence bundles: the folder a diagnoser reads, the Kineto vocabulary, the streaming trace reader and
the per-step trace summary every built-in reader shares, and import of outside traces."""
