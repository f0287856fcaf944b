"""Pure pandas analyses: DataFrame in, DataFrame out."""
