package main

import "context"

func (b *bench) scale(ctx context.Context) error     { return nil }
