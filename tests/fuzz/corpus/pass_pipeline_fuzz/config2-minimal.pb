

outputoutput""
GraphModule